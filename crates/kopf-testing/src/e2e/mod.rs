//! End-to-end runners: an operator binary as a child process, and the clusters it runs
//! against (the fake API server, kind, an existing cluster).

pub mod cluster;
pub mod runner;
