//! Benchmarks that run on the lab: [`capture`] (what recording costs under iperf3 load, agents in
//! namespaces) and [`machine`] (what machine a benchmark ran on, for every report).
mod blast;
pub mod capture;
pub mod machine;
