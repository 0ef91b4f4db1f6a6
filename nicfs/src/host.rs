//! The host side of the node, as nicfs sees it: the link to the node's kworker and the
//! node's mode ([`link`]: `normal` while a kworker heartbeats, `isolated` otherwise), and
//! the copy lists a batch's file data becomes ([`copylist`]), executed through that link —
//! by the kworker, or by nicfs itself with the same executor (the `linefs-copier` crate).
//!
//! Imports: [`crate::peer`] (how a connection's peer is named, bad frames) and the
//! observability primitives; nothing above (no node, session or daemon).

pub(crate) mod copylist;
pub mod link;
