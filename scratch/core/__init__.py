"""One head kernel and its front doors: options, examples, masks, attention, multi-head, rows."""
