"""The bottom layer every other imports: errors and exit codes, the run model, the redactor. Imports nothing of
rtjob's own (the cross-process contract with the training code lives in the top-level ``rtjob_contract``)."""
