//! floe-server's integration tests, as one test binary: the server in-process (`common` starts
//! it and holds the clients), each concern a module. One binary links the server once where
//! five did. `tests/clock_warning.rs` stays a binary of its own: it reads the log through a
//! subscriber set on its thread, and a test running beside it could make tracing skip that
//! warning (see there).

mod common;

mod api;
mod hostile;
mod ids;
mod limits;
mod readiness;
mod security;
mod wrong_port;
