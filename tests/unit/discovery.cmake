# NIC discovery: the authenticated service wire (codecs and a live server on loopback), the
# driver and task services run in-process on loopback, and the start-up cache file.
hvd_unit_test(service_wire tests/unit/test_service_wire.c)
hvd_unit_test(discovery tests/unit/test_discovery.c)
hvd_unit_test(start_cache tests/unit/test_cache.c)
