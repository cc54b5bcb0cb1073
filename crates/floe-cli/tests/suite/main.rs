//! floe-cli's tests of the real `floe` binary, as one test binary: each file a module, the
//! process harnesses (`common`, `serving`) shared. One binary links the server once where
//! twenty did. The fault suite (`tests/faults.rs`) stays a binary of its own: its pause and
//! partition rows time windows of a second or two, and run one at a time, alone.

mod common;
mod serving;

mod cli;
mod client;
mod clients;
mod config;
mod connections;
mod crash;
mod docs_examples;
mod etcd_secure;
mod exit_codes;
mod hostile_cli;
mod image;
mod kubernetes;
mod migrate;
mod monitoring;
mod openapi;
mod operate;
mod packaging;
mod platform;
mod present;
mod registry;
mod restart;
mod security;
mod sequencer;
mod serve_lease;
mod serve_present;
mod servers;
mod shutdown;
mod status_page;
mod three_nodes;
mod zk_auth;
