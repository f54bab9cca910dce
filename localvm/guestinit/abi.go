package guestinit

// ABI names this package's sources: the launcher runs a guest's init from
// the daemon's binary only when that binary holds this exact string, and
// the init checks it again against ABIEnv. It is the sha256 of this
// package's non-test Go files (TestABINamesTheSources keeps it so), so any
// change to what the init does or how it is spoken to gives a new ABI, and
// an agentd built before the change is never used as a newer emulator's
// init: the emulator's own binary is, as before.
const ABI = "microvms-guest-abi:" + abiSum

// abiSum is set by hand from TestABINamesTheSources's failure message.
const abiSum = "2d6dabdd5a67c57337debc44d219ae8b681ff495040c686fe9d0d4e4063ed3c5"
