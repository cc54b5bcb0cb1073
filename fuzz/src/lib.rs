//! The bodies of floe's fuzz targets, one function a target, each taking the raw input.
//!
//! The modules use floe's crates and `std` only (no libFuzzer), so that floe's own tests
//! include the same files (`#[path]`) and replay `fuzz/regressions/<target>/` through the same
//! functions: crates/floe-core/tests/hostile.rs for [`formats`], crates/floe-server/tests/suite/hostile.rs
//! for [`config`], through [`replay`].

pub mod config;
pub mod formats;
pub mod replay;
