/* hvd public types: status codes, data types and reduce operations.
 *
 * The enum values of hvd_dtype_t and hvd_reduce_op_t match Horovod's DataType and ReduceOp so
 * that bindings can pass Horovod's constants straight through. Status codes are the
 * project's: HVD_OK is 0 and every error is negative. */
#ifndef HVD_TYPES_H
#define HVD_TYPES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HVD_BUILDING_LIBRARY)
#define HVD_API __attribute__((visibility("default")))
#else
#define HVD_API
#endif

typedef enum {
    HVD_UINT8 = 0,
    HVD_INT8 = 1,
    HVD_UINT16 = 2,
    HVD_INT16 = 3,
    HVD_INT32 = 4,
    HVD_INT64 = 5,
    HVD_FLOAT16 = 6,
    HVD_FLOAT32 = 7,
    HVD_FLOAT64 = 8,
    HVD_BOOL = 9,
    HVD_BFLOAT16 = 10
} hvd_dtype_t;

typedef enum {
    HVD_AVERAGE = 0,
    HVD_SUM = 1,
    HVD_ADASUM = 2,
    HVD_MIN = 3,
    HVD_MAX = 4,
    HVD_PRODUCT = 5
} hvd_reduce_op_t;

typedef int hvd_status_t;

#define HVD_OK 0
/* An argument is out of range or inconsistent (the message names it). */
#define HVD_ERR_INVALID_ARG (-1)
/* A deadline expired; the message names what was being waited for. */
#define HVD_ERR_TIMEOUT (-2)
/* A peer process died or its connection closed mid-operation. */
#define HVD_ERR_PEER_LOST (-3)
/* Elastic mode: the set of hosts changed; re-initialise. */
#define HVD_ERR_HOSTS_UPDATED (-4)
/* hvd is not initialised, or has been shut down. */
#define HVD_ERR_SHUT_DOWN (-5)
/* Ranks disagree on an operation's dtype, size, op or root. */
#define HVD_ERR_MISMATCH (-6)
/* Memory could not be allocated. */
#define HVD_ERR_NO_MEMORY (-7)
/* A system call failed (the message carries errno's text). */
#define HVD_ERR_IO (-8)
/* A peer or server sent bytes that do not follow the protocol. */
#define HVD_ERR_PROTOCOL (-9)
/* A request or message failed authentication with the job secret. */
#define HVD_ERR_AUTH (-10)
/* A looked-up item (key, scope, host) does not exist. */
#define HVD_ERR_NOT_FOUND (-11)
/* An input exceeds a configured bound. */
#define HVD_ERR_TOO_LARGE (-12)
/* The operation is not supported by this build or configuration. */
#define HVD_ERR_UNSUPPORTED (-13)
/* The call is not valid in the current state (for example hvd_init twice). */
#define HVD_ERR_STATE (-14)

typedef long long hvd_handle_t;

#ifdef __cplusplus
}
#endif

#endif /* HVD_TYPES_H */
