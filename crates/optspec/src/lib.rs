//! The one option engine of the workspace (issue 22 item 1): being written.
//! `files` (the bounded file reader) and the engine itself land in the next
//! commits.

#![forbid(unsafe_code)]

pub mod files;
