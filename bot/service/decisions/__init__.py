"""Every way a call is decided: one or several, edited, answered, granted, expired."""
