//! The POSIX permission-bit rule (owner, group, other; root passes), shared by the
//! permission checks ([`super::policy`]) and the shadow state they judge on
//! ([`super::shadow`]), which both use it and so cannot hold it for each other.

use crate::record::{Caller, InodeImage};

/// Whether `caller` has the permission bits of `want` (r=4, w=2, x=1) on `img`.
pub fn allows(caller: &Caller, img: &InodeImage, want: u32) -> bool {
    if caller.is_root() {
        return true;
    }
    let class = if caller.uid == img.uid {
        (img.mode >> 6) & 7
    } else if caller.in_group(img.gid) {
        (img.mode >> 3) & 7
    } else {
        img.mode & 7
    };
    class & want == want
}
