"""A backend that is not rtjob's: one folder and one registration (tests/unit/test_backend_contract.py calls
``register("toy", "support.toy_backend.backend:ToyBackend")``), which proves that a backend plugs in without an
edit outside its folder. Its "platform" is a dict in this process: runs are submitted PENDING and move only when
a test moves them."""
