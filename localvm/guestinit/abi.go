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
const abiSum = "1799d143fa04118d491042f7bff041a1efbdfa6e2809a06af923c1db658a7b8e"
