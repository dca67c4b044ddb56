"""Planning: the trace becomes columns of planned requests and encoded request files, before the clock."""
