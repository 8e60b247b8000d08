"""Kafka's error names and codes (facts from Kafka's ``clients/.../protocol/Errors.java``), and the one base class
of every exception meant to reach a client.

This module is the bottom of the house (below records/): every layer names a Kafka error as a member of
:class:`ErrorCode`, never as an int literal or a string, so a misspelt name fails the type checker, not a request.
``tests/test_names.py`` fails on an error code or API key written as a number outside ``protocol/``.

An exception that carries the Kafka error a client is answered with derives from :class:`ApiError` and sets
``kafka_error`` (an :class:`ErrorCode`): the records layer's, the storage layer's and the broker's errors all do,
and ``broker.errors.error_of`` maps any of them to (code, message) by ``isinstance``, not by probing attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ErrorCode(IntEnum):
    """Every Kafka error code by Kafka's name, e.g. ``ErrorCode.NOT_LEADER_OR_FOLLOWER == 6``."""

    # printed as its name (a log line, a message, a metric label), as the names it replaced were; the int stays
    # what the wire and JSON carry
    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return int.__format__(int(self), spec) if spec else self.name

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133


@dataclass(frozen=True, slots=True)
class KafkaError:
    name: str
    code: int
    retriable: bool
    message: str


# (whether Kafka's exception class is retriable, i.e. a RetriableException subclass; a short description in our
# own wording) for every code
_DETAILS: dict[ErrorCode, tuple[bool, str]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: (False, "Unexpected server error while processing the request."),
    ErrorCode.NONE: (False, "No error."),
    ErrorCode.OFFSET_OUT_OF_RANGE: (False, "Requested offset is outside the range held by the server."),
    ErrorCode.CORRUPT_MESSAGE: (True, "A record failed its CRC check, exceeded a size limit or is otherwise corrupt."),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (True, "This server does not host this topic-partition."),
    ErrorCode.INVALID_FETCH_SIZE: (False, "The requested fetch size is invalid."),
    ErrorCode.LEADER_NOT_AVAILABLE: (True, "No leader for this partition right now (e.g. during an election)."),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (True, "This server is not the leader or a follower for that partition."),
    ErrorCode.REQUEST_TIMED_OUT: (True, "The request timed out."),
    ErrorCode.BROKER_NOT_AVAILABLE: (False, "The broker is not available."),
    ErrorCode.REPLICA_NOT_AVAILABLE: (True, "The replica is not available for the requested partition."),
    ErrorCode.MESSAGE_TOO_LARGE: (False, "The request included a message larger than the server accepts."),
    ErrorCode.STALE_CONTROLLER_EPOCH: (False, "The controller moved to another broker."),
    ErrorCode.OFFSET_METADATA_TOO_LARGE: (False, "The metadata field of the offset request was too large."),
    ErrorCode.NETWORK_EXCEPTION: (True, "The server disconnected before a response was received."),
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (True, "The coordinator is loading and cannot process requests."),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: (True, "The coordinator is not available."),
    ErrorCode.NOT_COORDINATOR: (True, "This is not the correct coordinator."),
    ErrorCode.INVALID_TOPIC_EXCEPTION: (False, "The request attempted an operation on an invalid topic."),
    ErrorCode.RECORD_LIST_TOO_LARGE: (False, "The request included a batch larger than the configured segment size."),
    ErrorCode.NOT_ENOUGH_REPLICAS: (True, "Fewer in-sync replicas than required."),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (True, "Written, but to fewer in-sync replicas than required."),
    ErrorCode.INVALID_REQUIRED_ACKS: (False, "Produce request specified an invalid value for required acks."),
    ErrorCode.ILLEGAL_GENERATION: (False, "Specified group generation id is not valid."),
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (False, "The member's protocol type or protocols are incompatible with the group."),
    ErrorCode.INVALID_GROUP_ID: (False, "The configured groupId is invalid."),
    ErrorCode.UNKNOWN_MEMBER_ID: (False, "The coordinator is not aware of this member."),
    ErrorCode.INVALID_SESSION_TIMEOUT: (False, "The session timeout is outside the broker's allowed range."),
    ErrorCode.REBALANCE_IN_PROGRESS: (False, "The group is rebalancing, so a rejoin is needed."),
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: (False, "The committing offset data size is not valid."),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (False, "Topic authorization failed."),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (False, "Group authorization failed."),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (False, "Cluster authorization failed."),
    ErrorCode.INVALID_TIMESTAMP: (False, "The timestamp of the message is out of acceptable range."),
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: (False, "The broker does not support the requested SASL mechanism."),
    ErrorCode.ILLEGAL_SASL_STATE: (False, "Request is not valid given the current SASL state."),
    ErrorCode.UNSUPPORTED_VERSION: (False, "The version of API is not supported."),
    ErrorCode.TOPIC_ALREADY_EXISTS: (False, "Topic with this name already exists."),
    ErrorCode.INVALID_PARTITIONS: (False, "Number of partitions is below 1."),
    ErrorCode.INVALID_REPLICATION_FACTOR: (False, "Replication factor is below 1 or larger than the number of brokers."),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: (False, "Replica assignment is invalid."),
    ErrorCode.INVALID_CONFIG: (False, "Configuration is invalid."),
    ErrorCode.NOT_CONTROLLER: (True, "This is not the correct controller for this cluster."),
    ErrorCode.INVALID_REQUEST: (False, "The request was malformed or otherwise invalid."),
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: (False, "The message format version on the broker does not support the request."),
    ErrorCode.POLICY_VIOLATION: (False, "Request parameters do not satisfy the configured policy."),
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: (False, "The broker received an out of order sequence number."),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: (False, "The broker received a duplicate sequence number."),
    ErrorCode.INVALID_PRODUCER_EPOCH: (False, "Producer attempted to produce with an old epoch."),
    ErrorCode.INVALID_TXN_STATE: (False, "The producer attempted a transactional operation in an invalid state."),
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: (False, "The producer id does not match the transactional id."),
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: (False, "The transaction timeout is larger than the broker's maximum."),
    ErrorCode.CONCURRENT_TRANSACTIONS: (True, "Another transaction operation for this producer is in progress."),
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: (False, "The transaction coordinator is no longer the current coordinator."),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (False, "Transactional Id authorization failed."),
    ErrorCode.SECURITY_DISABLED: (False, "Security features are disabled."),
    ErrorCode.OPERATION_NOT_ATTEMPTED: (False, "The broker did not attempt to execute this operation."),
    ErrorCode.KAFKA_STORAGE_ERROR: (True, "Disk error when trying to access the log file."),
    ErrorCode.LOG_DIR_NOT_FOUND: (False, "The user-specified log directory is not found in the broker config."),
    ErrorCode.SASL_AUTHENTICATION_FAILED: (False, "SASL authentication failed."),
    ErrorCode.UNKNOWN_PRODUCER_ID: (False, "The broker has no state for this producer id."),
    ErrorCode.REASSIGNMENT_IN_PROGRESS: (False, "A partition reassignment is in progress."),
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: (False, "Delegation token feature is not enabled."),
    ErrorCode.DELEGATION_TOKEN_NOT_FOUND: (False, "Delegation token is not found on server."),
    ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: (False, "Specified principal is not a valid owner/renewer."),
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: (False, "Delegation token requests are not allowed on this channel."),
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: (False, "Delegation token authorization failed."),
    ErrorCode.DELEGATION_TOKEN_EXPIRED: (False, "Delegation token is expired."),
    ErrorCode.INVALID_PRINCIPAL_TYPE: (False, "Supplied principalType is not supported."),
    ErrorCode.NON_EMPTY_GROUP: (False, "The group is not empty."),
    ErrorCode.GROUP_ID_NOT_FOUND: (False, "The group id does not exist."),
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND: (True, "The fetch session ID was not found."),
    ErrorCode.INVALID_FETCH_SESSION_EPOCH: (True, "The fetch session epoch is invalid."),
    ErrorCode.LISTENER_NOT_FOUND: (True, "No matching listener on the leader broker."),
    ErrorCode.TOPIC_DELETION_DISABLED: (False, "Topic deletion is disabled."),
    ErrorCode.FENCED_LEADER_EPOCH: (True, "The leader epoch in the request is older than the broker's."),
    ErrorCode.UNKNOWN_LEADER_EPOCH: (True, "The leader epoch in the request is newer than the broker's."),
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: (False, "The requesting client does not support the compression type."),
    ErrorCode.STALE_BROKER_EPOCH: (False, "Broker epoch has changed."),
    ErrorCode.OFFSET_NOT_AVAILABLE: (True, "The leader high watermark has not caught up yet."),
    ErrorCode.MEMBER_ID_REQUIRED: (False, "The group member needs a valid member id to join the group."),
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: (True, "The preferred leader was not available."),
    ErrorCode.GROUP_MAX_SIZE_REACHED: (False, "The group has reached its maximum size."),
    ErrorCode.FENCED_INSTANCE_ID: (False, "Another member with the same group.instance.id fenced this one."),
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: (True, "Eligible topic partition leaders are not available."),
    ErrorCode.ELECTION_NOT_NEEDED: (True, "Leader election not needed for topic partition."),
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: (False, "No partition reassignment is in progress."),
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: (False, "Deleting offsets of a topic the group is subscribed to is forbidden."),
    ErrorCode.INVALID_RECORD: (False, "This record failed the broker's validation and was rejected."),
    ErrorCode.UNSTABLE_OFFSET_COMMIT: (True, "There are unstable offsets that need to be cleared."),
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: (True, "The throttling quota has been exceeded."),
    ErrorCode.PRODUCER_FENCED: (False, "A newer producer with the same transactionalId fenced this one."),
    ErrorCode.RESOURCE_NOT_FOUND: (False, "A request illegally referred to a resource that does not exist."),
    ErrorCode.DUPLICATE_RESOURCE: (False, "A request illegally referred to the same resource twice."),
    ErrorCode.UNACCEPTABLE_CREDENTIAL: (False, "Requested credential would not meet criteria for acceptability."),
    ErrorCode.INCONSISTENT_VOTER_SET: (False, "The voter set is inconsistent with the local voter set."),
    ErrorCode.INVALID_UPDATE_VERSION: (False, "The given update version was invalid."),
    ErrorCode.FEATURE_UPDATE_FAILED: (False, "Unable to update finalized features due to a server error."),
    ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE: (False, "The forwarded principal could not be deserialized."),
    ErrorCode.SNAPSHOT_NOT_FOUND: (False, "Requested snapshot was not found."),
    ErrorCode.POSITION_OUT_OF_RANGE: (False, "Requested position is outside the snapshot."),
    ErrorCode.UNKNOWN_TOPIC_ID: (True, "This server does not host this topic ID."),
    ErrorCode.DUPLICATE_BROKER_REGISTRATION: (False, "This broker ID is already in use."),
    ErrorCode.BROKER_ID_NOT_REGISTERED: (False, "The given broker ID was not registered."),
    ErrorCode.INCONSISTENT_TOPIC_ID: (True, "The log's topic ID did not match the topic ID in the request."),
    ErrorCode.INCONSISTENT_CLUSTER_ID: (False, "The clusterId in the request does not match the server's."),
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: (False, "The transactionalId could not be found."),
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR: (True, "The fetch session encountered inconsistent topic ID usage."),
    ErrorCode.INELIGIBLE_REPLICA: (False, "The new ISR contains at least one ineligible replica."),
    ErrorCode.NEW_LEADER_ELECTED: (False, "The AlterPartition request led to a new leader being elected."),
    ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE: (False, "The requested offset is moved to tiered storage."),
    ErrorCode.FENCED_MEMBER_EPOCH: (False, "The member epoch is fenced by the group coordinator."),
    ErrorCode.UNRELEASED_INSTANCE_ID: (False, "The instance ID is still used by another member."),
    ErrorCode.UNSUPPORTED_ASSIGNOR: (False, "The assignor or its version range is not supported by the group."),
    ErrorCode.STALE_MEMBER_EPOCH: (False, "The member epoch is stale."),
    ErrorCode.MISMATCHED_ENDPOINT_TYPE: (False, "The request was sent to an endpoint of the wrong type."),
    ErrorCode.UNSUPPORTED_ENDPOINT_TYPE: (False, "This endpoint type is not supported yet."),
    ErrorCode.UNKNOWN_CONTROLLER_ID: (False, "This controller ID is not known."),
    ErrorCode.UNKNOWN_SUBSCRIPTION_ID: (False, "The client telemetry subscription id is unknown."),
    ErrorCode.TELEMETRY_TOO_LARGE: (False, "The client telemetry request is larger than allowed."),
    ErrorCode.INVALID_REGISTRATION: (False, "The controller considered the registration invalid."),
    ErrorCode.TRANSACTION_ABORTABLE: (False, "The server hit an error the producer can recover from by aborting."),
    ErrorCode.INVALID_RECORD_STATE: (False, "The record state is invalid."),
    ErrorCode.SHARE_SESSION_NOT_FOUND: (True, "The share session was not found."),
    ErrorCode.INVALID_SHARE_SESSION_EPOCH: (True, "The share session epoch is invalid."),
    ErrorCode.FENCED_STATE_EPOCH: (False, "The share-group state epoch did not match."),
    ErrorCode.INVALID_VOTER_KEY: (False, "The voter key does not match the receiving replica's key."),
    ErrorCode.DUPLICATE_VOTER: (False, "The voter is already part of the set of voters."),
    ErrorCode.VOTER_NOT_FOUND: (False, "The voter is not part of the set of voters."),
    ErrorCode.INVALID_REGULAR_EXPRESSION: (False, "The regular expression is not valid."),
    ErrorCode.REBOOTSTRAP_REQUIRED: (False, "Client metadata is stale; the client should rebootstrap."),
    ErrorCode.STREAMS_INVALID_TOPOLOGY: (False, "The supplied topology is invalid."),
    ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH: (False, "The supplied topology epoch is invalid."),
    ErrorCode.STREAMS_TOPOLOGY_FENCED: (False, "The supplied topology epoch is outdated."),
    ErrorCode.SHARE_SESSION_LIMIT_REACHED: (False, "The limit of share sessions has been reached."),
}

ERRORS: tuple[KafkaError, ...] = tuple(KafkaError(c.name, int(c), *_DETAILS[c]) for c in ErrorCode)
ERRORS_BY_NAME: dict[str, KafkaError] = {e.name: e for e in ERRORS}
ERRORS_BY_CODE: dict[int, KafkaError] = {e.code: e for e in ERRORS}


def error_code(name: ErrorCode | str) -> ErrorCode:
    """The one name -> code lookup: the member for a Kafka error name (a member passes through); KeyError for a
    name Kafka does not have.

    Code that names an error writes ``ErrorCode.X``, which the type checker verifies; this lookup is for names
    read from outside (a file, ZooKeeper, a CLI flag). The broker's former second lookup (``code_of``) answered an
    unknown name UNKNOWN_SERVER_ERROR silently; an unknown name is a bug, so it raises here, and a handler's
    exception is answered UNKNOWN_SERVER_ERROR and logged by ``broker.errors.error_of``.
    """
    if isinstance(name, ErrorCode):
        return name
    return ErrorCode[name]


def error_for_code(code: int) -> KafkaError:
    """The table entry for a code; unknown codes map to UNKNOWN_SERVER_ERROR's entry with that code."""
    err = ERRORS_BY_CODE.get(code)
    if err is None:
        return KafkaError("UNKNOWN_SERVER_ERROR", code, False, f"Unknown error code {code}.")
    return err


class ApiError(Exception):
    """Base of every exception meant to reach a client (Kafka's ``ApiException``): ``kafka_error`` is the Kafka
    error the client is answered with; the text (or a ``message`` attribute) is the error message."""

    kafka_error: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
