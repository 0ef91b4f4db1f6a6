//! The file-system calls, grouped by what they work on. Every update follows one path
//! ([`crate::state::Front::commit`]): check the call against the view, build the entry's
//! records (blind post-images), append the entry to the log and make it durable, then apply
//! the same records to the view. Nothing is acknowledged before the entry is durable;
//! nothing in the view is ahead of the log.

mod attr;
mod data;
mod dirstream;
mod leased;
mod namespace;
mod rename;
mod xattr;
