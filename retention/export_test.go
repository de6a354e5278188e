package retention

// SetCut makes r call cut at the named points of a removal batch
// ("written": the files are written under their pending names; "committed":
// the batch's transaction committed, the files are not renamed yet) and
// after each query of the expunge ("expunged": its commands are done); an
// error stops the pass there, as a crash would.
func SetCut(r *Retention, cut func(point string) error) { r.cut = cut }

// Shard is the directory of a batch's files in the archive's.
var Shard = shard
