# pytester drives the plugin's own tests (tests/) in isolated pytest runs.
pytest_plugins = ["pytester"]
