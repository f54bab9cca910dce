// Package checkpoint saves a sandbox's files once and lays them into any
// number of new sandboxes: Checkpoint streams chosen paths out of a running
// sandbox through agentd's tar download (GET /v1/fs/tar), compresses the
// stream (zstd) while hashing it (sha256) and stores it as one
// content-addressed object, keyed by that digest, plus a manifest
// (cliapi.CheckpointManifest) in an S3 bucket: the account's bucket on AWS,
// the emulator's S3 slice locally, through the same aws-sdk-go-v2 code and
// its transfer manager (multipart past its threshold, with checksums). The
// bytes go up while they are packed, under a staging key (Prefix +
// "staging/<random>.tar.zst"), since the digest that names the object is
// known only at the end; one server-side copy (CopyObject, or UploadPartCopy
// parts past 5 GiB) then puts it under its digest and the staging key is
// deleted, so no byte is spooled on the host or sent twice. The object is
// written first and the manifest last, so a checkpoint that fails at any
// point leaves no manifest, and nothing lists or restores it; a failure it
// sees removes its staging object too, and only a process killed mid-way
// leaves one (or an unfinished multipart upload) under staging/, which
// nothing reads.
//
// Restore launches a sandbox from the checkpoint's image ARN and version
// (through a sandbox.Launcher) and lays the files back before returning it,
// so its first command sees them. Before anything is launched or written it
// downloads the object to a bounded host temporary file, checks its length
// and sha256 against the manifest, and reads the whole archive through once:
// a truncated, corrupted or foreign object, or a checkpoint of another image
// version than the one asked for, is refused with ERR_CHECKPOINT_REFUSED
// naming why (RefusalError.Reason; AllowOtherVersion overrides the version
// check). Fork is a checkpoint and n restores run by sandbox.RunMany: its
// concurrency bound, per-sandbox outcomes, teardown, backoff on a throttled
// RunMicrovm and one cost report. List and Remove manage stored checkpoints
// by name or digest.
//
// # What a checkpoint carries
//
// Regular files with their bytes, directories (empty ones too), symbolic
// links (relative and absolute targets), hard links (a pair stays one inode),
// permission bits (setuid, setgid and sticky included), owners (uid and gid,
// by number), and modification times; a sparse file costs the object only
// what its compressed zeros cost and lands sparse again (agentd writes
// all-zero blocks as holes). Files are laid by agentd's tar upload, one
// upload per saved path confined by agentd beneath that path, and their
// modes, owners and times then applied by one shell script run in the
// sandbox (chmod, chown -h, touch -h; the image needs sh and those), because
// the upload masks modes and keeps neither owners nor times. Files the new
// sandbox's image already has under a saved path and the checkpoint lacks
// are left in place. Sockets, fifos and devices are not
// carried (the tar download skips them); extended attributes, ACLs and file
// capabilities are not carried. Processes, their memory and open
// descriptors are not carried: suspend and resume keep those, for the one
// MicroVM suspended.
//
// # Files written while a checkpoint runs
//
// The writers are paused: every command agentd is running in the sandbox
// has its process group stopped (SIGSTOP through agentd's signal route)
// before the first byte is read and continued (SIGCONT) after the last,
// whatever happens between, so the saved tree is one moment's tree and the
// manifest says WritersPaused. A process outside agentd's exec groups (a
// daemon that made itself a new session) is not paused; if the tree changes
// under the read anyway, the tar download fails (the daemon refuses a file
// that changed size under its packer) and no manifest is written.
// NoPause leaves the writers running; then the manifest's
// ChangedUnderneath lists every path whose size or mtime changed between
// the read and a listing taken after it.
//
// # A checkpoint baked into an image
//
// BakeImage makes a new image (CreateMicrovmImage, its own name) from the
// artifact of the image version the checkpoint was taken on: the same
// Dockerfile, agentd and build context, the same base and base version,
// hooks, resources, capabilities, egress and environment, plus the
// checkpoint's files as one plain tar (BakedTar) that a last Dockerfile
// step ADDs at "/". The platform snapshots the built image, so every launch
// starts with the files in place and transfers nothing. The source image's
// artifact must still be readable (s3:// through the store's client, or a
// local file://).
//
// # Volumes
//
// A volume is a named chain of checkpoint generations of one directory
// (Volumes, Mount, "NAME:/path"). Attaching it to a sandbox lays its newest
// generation at the path, or makes an empty directory on first use; Sync,
// and the detach at terminate, save a new generation. A volume keeps its
// newest Keep generations (DefaultKeep, 3): each save removes the oldest
// beyond that. One sandbox writes a volume at a time: attaching takes a
// lease object beside the generations with S3's conditional put
// (If-None-Match "*", or If-Match on the ETag read, so two racing attaches
// cannot both win), renewed by the holder while it lives (KeepLeased,
// Renew, Sync) and released at detach. A second attach while the lease is
// live is refused, ERR_CHECKPOINT_REFUSED with ReasonVolumeLeased naming
// the holder's MicroVM id (finding no-user-snapshot: the platform has no
// volume of its own to arbitrate). A holder that dies stops renewing and its
// lease expires LeaseTTL (DefaultLeaseTTL, 5 minutes) after its last
// renewal; the next attach then takes the volume over, and the dead
// holder's late Sync is refused rather than saved. "Dies" is the MicroVM's
// death where HolderAlive can ask the control plane (client/platform sets
// it): a lapsed lease whose holder is still up (kept by `run --keep`, its
// attaching process gone) still holds until it ends. Holders compare their
// own clocks against the expiry, so clocks skewed by more than the TTL
// defeat the expiry; the conditional puts still keep two live writers from
// both holding the lease at once.
//
// What it must never do: write a manifest before its object is whole, lay
// a single file from an object it has not verified, log the agent token, or
// leave a sandbox it launched for a restore that failed running.
package checkpoint
