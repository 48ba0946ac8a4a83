//! `effector`: reconciles `Effect` objects by performing the reads and
//! writes their spec lists, and copies everything it receives (the object,
//! the answers, the outcomes, the round) into its status.

/// The plugin's name.
pub const NAME: &str = "effector";
/// The kind it reconciles.
pub const KIND: &str = "Effect";

include!("effector.rs");
