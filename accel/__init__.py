"""accel package."""
