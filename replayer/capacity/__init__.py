"""`llmreplay capacity`: how much of the trace's own traffic a target holds within the SLOs (issue #17)."""
