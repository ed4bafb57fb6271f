"""Whether reviews are real: second opinions, attention, details, the weekly digest."""
