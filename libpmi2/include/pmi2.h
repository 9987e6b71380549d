/* libi's libpmi2.so: the PMI-2 client API: every function MPICH's pmi2.h declares, with its
 * signature, plus Slurm's PMI2_Job_GetRank, PMI2_Info_GetSize and PMIX_Ring.
 * Link with -lpmi2 (see docs/pmi-libraries.md). Under a process manager the
 * library talks to it over the socket in PMI_FD; without PMI_FD the process is a singleton
 * (rank 0 of 1, local key-value space and node attributes). */
#ifndef LIBI_PMI2_H_INCLUDED
#define LIBI_PMI2_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

#define PMI2_MAX_KEYLEN     64
#define PMI2_MAX_VALLEN     1024
#define PMI2_MAX_ATTRVALUE  1024
#define PMI2_ID_NULL        -1

/* Return codes (the values Slurm and MPICH use). */
#define PMI2_SUCCESS                 0
#define PMI2_FAIL                   -1
#define PMI2_ERR_INIT                1
#define PMI2_ERR_NOMEM               2
#define PMI2_ERR_INVALID_ARG         3
#define PMI2_ERR_INVALID_KEY         4
#define PMI2_ERR_INVALID_KEY_LENGTH  5
#define PMI2_ERR_INVALID_VAL         6
#define PMI2_ERR_INVALID_VAL_LENGTH  7
#define PMI2_ERR_INVALID_LENGTH      8
#define PMI2_ERR_OTHER              14

typedef struct PMI_keyval_t {
    char *key;
    char *val;
} PMI_keyval_t;

typedef struct PMI2_Connect_comm {
    int (*read) (void *buf, int maxlen, void *ctx);
    int (*write) (const void *buf, int len, void *ctx);
    void *ctx;
    int isMain;
} PMI2_Connect_comm_t;

/* MPICH's info object (the layout of MPICH 4's MPIR_Info, which its MPI library passes to
 * PMI2_Job_Spawn). The name service calls accept and ignore it. */
struct MPIR_Info {
    int handle;
    int ref_count;
    struct MPIR_Info *next;
    char *key;
    char *value;
};

int PMI2_Init(int *spawned, int *size, int *rank, int *appnum);
int PMI2_Finalize(void);
/* 1 between PMI2_Init and PMI2_Finalize, else 0. */
int PMI2_Initialized(void);
/* Sends the abort to the process manager and exits with status 1. */
int PMI2_Abort(int flag, const char msg[]);

/* PMI-2 spawn. Info pairs of command i: info_keyval_sizes[i] entries from
 * info_keyval_vectors[i], each next one at ->next, or following in memory when ->next is
 * NULL (MPICH's list and MPICH's array both work). jobId gets the new job's id (cut to
 * jobIdSize), errors one 0 per process. A singleton cannot spawn (PMI2_FAIL). */
int PMI2_Job_Spawn(int count, const char *cmds[],
                   int argcs[], const char **argvs[],
                   const int maxprocs[],
                   const int info_keyval_sizes[],
                   const struct MPIR_Info *info_keyval_vectors[],
                   int preput_keyval_size,
                   const struct MPIR_Info *preput_keyval_vector[],
                   char jobId[], int jobIdSize, int errors[]);
int PMI2_Job_GetId(char jobid[], int jobid_size);
/* Slurm's. */
int PMI2_Job_GetRank(int *rank);
/* job-connect / job-disconnect; conn is not used (as in MPICH's client). */
int PMI2_Job_Connect(const char jobid[], PMI2_Connect_comm_t *conn);
int PMI2_Job_Disconnect(const char jobid[]);

int PMI2_KVS_Put(const char key[], const char value[]);
/* Collective: returns once every rank of the job has fenced. */
int PMI2_KVS_Fence(void);
/* *vallen: the value's length, or its negation when maxvalue was too small (the value is
 * then truncated). A missing key is PMI2_FAIL. */
int PMI2_KVS_Get(const char *jobid, int src_pmi_id, const char key[], char value[],
                 int maxvalue, int *vallen);

/* waitfor != 0: wait until a process on this node puts the attribute. */
int PMI2_Info_GetNodeAttr(const char name[], char value[], int valuelen, int *found,
                          int waitfor);
/* A found value's comma-separated integers (at most arraylen) and their number. */
int PMI2_Info_GetNodeAttrIntArray(const char name[], int array[], int arraylen, int *outlen,
                                  int *found);
int PMI2_Info_PutNodeAttr(const char name[], const char value[]);
/* Attributes: universeSize, PMI_process_mapping, and what the process manager provides. */
int PMI2_Info_GetJobAttr(const char name[], char value[], int valuelen, int *found);
int PMI2_Info_GetJobAttrIntArray(const char name[], int array[], int arraylen, int *outlen,
                                 int *found);
/* Slurm's: the number of processes on this node (from PMI_process_mapping). */
int PMI2_Info_GetSize(int *size);
/* Slurm's ring exchange (collective): the values of the ranks before and after this one,
 * wrapping; value shorter than maxvalue, which left and right hold. */
int PMIX_Ring(const char value[], int *rank, int *ranks, char left[], char right[],
              int maxvalue);

int PMI2_Nameserv_publish(const char service_name[], const struct MPIR_Info *info_ptr,
                          const char port[]);
int PMI2_Nameserv_lookup(const char service_name[], const struct MPIR_Info *info_ptr,
                         char port[], int portLen);
int PMI2_Nameserv_unpublish(const char service_name[], const struct MPIR_Info *info_ptr);

#ifdef __cplusplus
}
#endif
#endif
