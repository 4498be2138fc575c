"""A run's storage (s3:// or a folder), independent of any backend: locations, stores, the checkpoint layout,
`rtjob pull` and `rtjob results`."""
