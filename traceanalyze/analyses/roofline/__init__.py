"""The roofline: FLOPs and bytes per op from recorded shapes, against device peaks."""
