package client

// SetListBounds makes List's bounds small for a test, until restore.
func SetListBounds(entries, bytes int) (restore func()) {
	e, b := listMaxEntries, listMaxBytes
	listMaxEntries, listMaxBytes = entries, bytes
	return func() { listMaxEntries, listMaxBytes = e, b }
}
