//! `versioned2`: version 2.0.0 of the `versioned` hot-reload test plugin. It
//! reconciles `Versioned` objects by writing `{"version": "2.0.0", "n": spec.n}`
//! into their status, after `spec.work` iterations of busy work.

/// This build's version, recorded in every status it writes.
pub const VERSION: &str = "2.0.0";
/// The kind this build reconciles.
pub const KIND: &str = "Versioned";

include!("../../versioned/src/reconciler.rs");
