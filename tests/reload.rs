//! Hot reload (filled in below).
