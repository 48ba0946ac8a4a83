//! Native tests of the shared decisions and of each kind.
