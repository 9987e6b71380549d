/* libi's libpmi2.so: the PMI-2 client API (the signatures of Slurm's and MPICH's pmi2.h).
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

/* Info objects are accepted and ignored by the name service calls. */
struct MPID_Info;

int PMI2_Init(int *spawned, int *size, int *rank, int *appnum);
int PMI2_Finalize(void);
/* 1 between PMI2_Init and PMI2_Finalize, else 0. */
int PMI2_Initialized(void);
/* Sends the abort to the process manager and exits with status 1. */
int PMI2_Abort(int flag, const char msg[]);

int PMI2_Job_GetId(char jobid[], int jobid_size);
int PMI2_Job_GetRank(int *rank);

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
int PMI2_Info_PutNodeAttr(const char name[], const char value[]);
/* Attributes: universeSize, PMI_process_mapping, and what the process manager provides. */
int PMI2_Info_GetJobAttr(const char name[], char value[], int valuelen, int *found);

int PMI2_Nameserv_publish(const char service_name[], const struct MPID_Info *info_ptr,
                          const char port[]);
int PMI2_Nameserv_lookup(const char service_name[], const struct MPID_Info *info_ptr,
                         char port[], int portLen);
int PMI2_Nameserv_unpublish(const char service_name[], const struct MPID_Info *info_ptr);

#ifdef __cplusplus
}
#endif
#endif
