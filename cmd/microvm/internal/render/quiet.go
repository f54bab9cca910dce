package render

import (
	"os"
	"path/filepath"
	"time"
)

// staleWarningEvery is how often the rate table's staleness is said: its
// age moves once a day, and a warning repeated on every run trains a reader
// to skip stderr, where the warnings that matter are.
const staleWarningEvery = 24 * time.Hour

// StaleRates warns that the pinned rate table is old, at most once a day
// per user (a stamp in the user's cache directory) and never under --quiet.
// The JSON report still carries it in every envelope, for a program.
func (a *IO) StaleRates(msg string) {
	if msg == "" || a.Quiet {
		return
	}
	stamp := ""
	if dir, err := os.UserCacheDir(); err == nil {
		stamp = filepath.Join(dir, "microvm", "rates-staleness-warned")
		if st, err := os.Stat(stamp); err == nil && time.Since(st.ModTime()) < staleWarningEvery && !st.ModTime().After(time.Now()) {
			return
		}
	}
	a.Warn("%s (said at most once a day; --quiet silences it)", msg)
	if stamp != "" && os.MkdirAll(filepath.Dir(stamp), 0o700) == nil {
		_ = os.WriteFile(stamp, nil, 0o600)
		now := time.Now()
		_ = os.Chtimes(stamp, now, now)
	}
}
