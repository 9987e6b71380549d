/* libi's libpmi.so: the PMI-1 client API: every function MPICH's pmi.h declares, with its
 * signature, plus the older ones MPICH dropped and Slurm's libpmi still exports (clique,
 * ids, KVS create/destroy/iterators, option parsing).
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
#define PMI_ERR_INVALID_NUM_ARGS    9
#define PMI_ERR_INVALID_ARGS       10
#define PMI_ERR_INVALID_NUM_PARSED 11
#define PMI_ERR_INVALID_KEYVALP    12
#define PMI_ERR_INVALID_SIZE       13

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

typedef struct PMI_keyval_t {
    const char *key;
    char *val;
} PMI_keyval_t;

/* mcmd=spawn. errors gets one code per process (0 when the server sends none);
 * info_keyval_sizes may be NULL. A singleton cannot spawn (PMI_FAIL). */
int PMI_Spawn_multiple(int count,
                       const char *cmds[],
                       const char **argvs[],
                       const int maxprocs[],
                       const int info_keyval_sizesp[],
                       const PMI_keyval_t *info_keyval_vectors[],
                       int preput_keyval_size,
                       const PMI_keyval_t preput_keyval_vector[], int errors[]);

/* Not in MPICH's current pmi.h; older MPICH and Slurm declare them. */
/* This job's id: its KVS name (both calls). */
int PMI_Get_id(char id_str[], int length);
int PMI_Get_kvs_domain_id(char id_str[], int length);
int PMI_Get_id_length_max(int *length);
/* The ranks on this node, from PMI_process_mapping (this rank alone without one);
 * PMI_Get_clique_ranks needs length >= the clique size, else PMI_ERR_INVALID_LENGTH. */
int PMI_Get_clique_size(int *size);
int PMI_Get_clique_ranks(int ranks[], int length);
/* cmd=create_kvs / cmd=destroy_kvs: PMI_FAIL under libi (no such commands); Hydra ends
 * the job on them, as for MPICH's client. */
int PMI_KVS_Create(char kvsname[], int length);
int PMI_KVS_Destroy(const char kvsname[]);
/* cmd=getbyidx; the end is an empty key (libi's server lists no pairs: the first call
 * ends; Hydra ends the job on getbyidx, as for MPICH's client). */
int PMI_KVS_Iter_first(const char kvsname[], char key[], int key_len, char val[], int val_len);
int PMI_KVS_Iter_next(const char kvsname[], char key[], int key_len, char val[], int val_len);
/* Deprecated: no option is parsed (size 0), PMI_Free_keyvals frees with free(),
 * PMI_Get_options gives the empty string. */
int PMI_Parse_option(int num_args, char *args[], int *num_parsed, PMI_keyval_t **keyvalp,
                     int *size);
int PMI_Args_to_keyval(int *argcp, char *((*argvp)[]), PMI_keyval_t **keyvalp, int *size);
int PMI_Free_keyvals(PMI_keyval_t keyvalp[], int size);
int PMI_Get_options(char *str, int *length);

#ifdef __cplusplus
}
#endif
#endif
