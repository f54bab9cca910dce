package guestinit

// ABI names this package's sources: the launcher runs a guest's init from
// the BinaryName beside its agentd only when that binary holds this exact
// string, and the init checks it again against ABIEnv. It is the sha256 of
// this package's non-test Go files (TestABINamesTheSources keeps it so), so
// any change to what the init does or how it is spoken to gives a new ABI,
// and an init built before the change is never used by a newer emulator:
// the emulator's own binary is, as before.
const ABI = "microvms-guest-abi:" + abiSum

// abiSum is set by hand from TestABINamesTheSources's failure message.
const abiSum = "3436d940a834368fc47290d9d41c803e9ee2b066b44cab5214268afaf25eb4c0"
