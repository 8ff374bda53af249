from helpers.module_runner import run_module  # noqa: F401  (the fixture)
