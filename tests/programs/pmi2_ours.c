/* The PMI-2 test of pmi2_slurm.c, built against libi's libpmi2.so and pmi2.h, plus the
 * name service and argument checks. argv[1]: "ns" = expect a working name service (only the
 * singleton has one; under libi-mpiexec publish is refused and lookups miss). */
#define EXTRA_TESTS
#include "pmi2_slurm.c"

static void extra_tests(int argc, char **argv)
{
    char port[256];
    int singleton = getenv("PMI_FD") == NULL;
    CHECK(PMI2_KVS_Put(NULL, "x") == PMI2_ERR_INVALID_ARG, "null key");
    CHECK(PMI2_Job_GetId(NULL, 10) != PMI2_SUCCESS, "null jobid buffer");
    (void)argc, (void)argv;
    if (singleton) {
        CHECK(PMI2_Nameserv_publish("libi-svc", NULL, "port-1") == PMI2_SUCCESS, "publish");
        CHECK(PMI2_Nameserv_lookup("libi-svc", NULL, port, sizeof port) == PMI2_SUCCESS, "lookup");
        CHECK(strcmp(port, "port-1") == 0, "lookup gave %s", port);
        CHECK(PMI2_Nameserv_unpublish("libi-svc", NULL) == PMI2_SUCCESS, "unpublish");
    }
    if (singleton || (argc > 1 && strcmp(argv[1], "ns") == 0))
        CHECK(PMI2_Nameserv_lookup("libi-no-svc", NULL, port, sizeof port) != PMI2_SUCCESS,
              "lookup of an unpublished service");
}
