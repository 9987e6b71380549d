/* libi's libpmi.so: the PMI-1 client API (the function set MPICH's pmi.h declares).
 * Link with -lpmi (see docs/pmi-libraries.md). Under a process manager the
 * library talks to it over the socket in PMI_FD; without PMI_FD the process is a singleton
 * (rank 0 of 1, local key-value space). */
#ifndef LIBI_PMI_H_INCLUDED
#define LIBI_PMI_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes (the values MPICH uses). */
#define PMI_SUCCESS                 0
#define PMI_FAIL                   -1
#define PMI_ERR_INIT                1
#define PMI_ERR_NOMEM               2
#define PMI_ERR_INVALID_ARG         3
#define PMI_ERR_INVALID_KEY         4
#define PMI_ERR_INVALID_KEY_LENGTH  5
#define PMI_ERR_INVALID_VAL         6
#define PMI_ERR_INVALID_VAL_LENGTH  7
#define PMI_ERR_INVALID_LENGTH      8

#define PMI_FALSE 0
#define PMI_TRUE  1

/* The port buffer given to PMI_Lookup_name must hold this many bytes. */
#define PMI_MAX_PORT_NAME 256

int PMI_Init(int *spawned);
int PMI_Initialized(int *initialized);
int PMI_Finalize(void);
int PMI_Get_size(int *size);
int PMI_Get_rank(int *rank);
int PMI_Get_universe_size(int *size);
int PMI_Get_appnum(int *appnum);
/* Sends the abort to the process manager and exits with exit_code. */
int PMI_Abort(int exit_code, const char error_msg[]);

int PMI_KVS_Get_my_name(char kvsname[], int length);
int PMI_KVS_Get_name_length_max(int *length);
int PMI_KVS_Get_key_length_max(int *length);
int PMI_KVS_Get_value_length_max(int *length);
int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);
int PMI_KVS_Commit(const char kvsname[]);
int PMI_Barrier(void);
/* A missing key is PMI_FAIL; a value longer than length-1 is PMI_ERR_INVALID_LENGTH. */
int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length);

int PMI_Publish_name(const char service_name[], const char port[]);
int PMI_Unpublish_name(const char service_name[]);
int PMI_Lookup_name(const char service_name[], char port[]);

#ifdef __cplusplus
}
#endif
#endif
