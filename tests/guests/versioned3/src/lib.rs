//! `versioned3`: version 3.0.0 of the `versioned` hot-reload test plugin. It
//! reconciles `VersionedB` objects by writing `{"version": "3.0.0", "n": spec.n}`
//! into their status, after `spec.work` iterations of busy work.

/// This build's version, recorded in every status it writes.
pub const VERSION: &str = "3.0.0";
/// The kind this build reconciles.
pub const KIND: &str = "VersionedB";

include!("../../versioned/src/reconciler.rs");
