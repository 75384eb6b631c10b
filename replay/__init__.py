"""Running job documents by hand: previews (dry runs) and re-runs of past commits
(``compactor replay``)."""
