//! A baton dir shared by the members of one group (`baton init --shared`).
//!
//! A baton dir is private to its owner unless it is *shared*: set-group-ID,
//! with read, write and search for its group (mode `2770`, as
//! `baton init --shared GROUP DIR` leaves it). Then every member of that group
//! may use it; everyone else is refused, and a symlinked or world-writable dir
//! is refused as ever. The set-group-ID bit gives every file and directory
//! created inside the dir's group; this module gives them group read and
//! write (directories also search and set-group-ID) whatever the creator's
//! umask, so that a lock file, group document, workspace record or event log
//! created by one member stays usable by the others. A file is made shared
//! right after its creation, by its creator (only the owner may change its
//! mode); a member that opens it in between is refused for that instant, so
//! the creators here create under a temporary name or retry.
//!
//! Every function takes the directory the file is created in: whether that
//! directory is shared decides, so the callers need no baton dir handle.

//! Windows has no set-group-ID directories: a baton dir there is shared
//! through its ACL, which baton leaves alone; [`is_shared`] is always false,
//! [`group_id`] finds nothing and `baton init --shared` is refused.

pub use crate::sys::sharing::{
    create_dir, describe_group, group_id, group_name, is_member, is_shared, open_or_create,
    open_umask_to_group, share_new_file, SHARED_DIR_BITS,
};
