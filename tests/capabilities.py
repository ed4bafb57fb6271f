"""What a machine may lack, so that a test skips there instead of failing: on CI (CI=true) a
skip is a failure unless its reason starts with one of these (see `conftest.py`)."""

MISSING_BROWSER = "needs a browser"
MISSING_DOCKER = "needs Docker"
ALLOWED_ON_CI = (MISSING_BROWSER, MISSING_DOCKER)
