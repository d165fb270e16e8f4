//! End-to-end runners: an operator binary as a child process, the clusters it runs against
//! (the fake API server, kind, an existing cluster), and Python for compatibility tests.

pub mod cluster;
pub mod python;
pub mod runner;
