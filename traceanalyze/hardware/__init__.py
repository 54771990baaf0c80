"""What each GPU can do: its model and vendor, occupancy limits, peak rates."""
