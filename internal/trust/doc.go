// Package trust decides whether a file edge reads a secret or its state
// from is edge's own: the admin token and everything else in state_dir,
// private keys, ticket and cookie keys, tokens.
//
// A mode check alone is not enough. Where state_dir sits in a directory
// another local user can write (or was created by that user first), that
// user can plant admin.token, with mode 0600 and their own content; an
// edge running as root then takes it, and the token drives the upgrade
// endpoint, which runs a binary. So, as OpenSSH does for authorized_keys
// (secure_filename), a file is edge's when:
//   - it is opened without following a symbolic link at its last
//     component (O_NOFOLLOW), and judged by fstat of what was opened, so
//     the file read is the file checked;
//   - it is a regular file owned by edge's user or root, that group and
//     others can neither write nor, for a secret, read;
//   - its directory and every directory above it are owned by edge's
//     user or root, and none lets group or others write into it, but for
//     a root-owned sticky directory above it (/tmp), where others can add
//     entries but not rename or remove edge's;
//   - a symbolic link on the way to its directory is owned by edge's user
//     or root, and the directories it leads to pass the same test: the
//     path is judged as the kernel resolves it, so another user's link in
//     /tmp, which they can point elsewhere between the check and the
//     open, is refused even while it points at a directory of edge's.
//
// Then nobody but edge's user and root can change what the path names,
// and the file opened after the check is the file judged.
//
// What edge writes there, WriteFile writes only into a directory that
// passes the same test, as a new 0600 file (O_EXCL) renamed into place,
// so a link another user left at the name is replaced, never written
// through.
//
// Whatever fails is refused with the path and the reason; the caller
// keeps what it had (a reload) or does not start. Unix only: on other
// systems the checks that have no meaning there pass.
package trust
