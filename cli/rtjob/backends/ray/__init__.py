"""Ray: the Jobs REST client, the backend (a cluster at an address, or the embedded one), the embedded
cluster itself, the resource pre-check, working-dir packaging checks and rtjob's job-level retries."""
