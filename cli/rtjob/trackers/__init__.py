"""Clients of the experiment trackers a run is mirrored to (MLflow over REST, stdlib only): below the run side and the
client alike, since the companion sends and `rtjob track resend` resends."""
