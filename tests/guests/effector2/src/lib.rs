//! `effector2`: the `effector` test plugin under another name, reconciling
//! `Effect2` objects, so that two plugins run side by side with grants and
//! limits of their own.

/// The plugin's name.
pub const NAME: &str = "effector2";
/// The kind it reconciles.
pub const KIND: &str = "Effect2";

include!("../../effector/src/effector.rs");
