"""The process runtime both CLIs run on: flags and usage errors, logging, leader election, HTTP health."""
