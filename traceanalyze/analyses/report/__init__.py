"""The report's contents: everything it shows, its findings and checked expectations."""
