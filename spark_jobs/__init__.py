"""PySpark Structured Streaming jobs over the outcome topics: the commit job and the replay job."""
