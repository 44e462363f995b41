# --config-file: the YAML walker and its merge into horovodrun's settings.
hvd_unit_test(config_file tests/unit/test_config_file.c)
