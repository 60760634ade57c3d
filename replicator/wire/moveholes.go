package wire

// holesAfter is the entries of ids after md and not past last, in the
// order given: Move.Individually as the broker would take it (it ignores
// an individual acknowledgement at or before the mark-delete position or
// past the last entry).
func holesAfter(ids []MessageID, md, last MessageID) []MessageID {
	var out []MessageID
	for _, id := range ids {
		e := entryOnly(id)
		if comparePosition(e, md) > 0 && comparePosition(e, last) <= 0 {
			out = append(out, e)
		}
	}
	return out
}
