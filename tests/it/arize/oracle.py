"""Arize oracle for tests/it/arize: the real arize==7.10.2 SDK, fed the DataFrame Merlin's
publisher builds, posting to the test's capturing server; and the SDK's own decoders
(pyarrow.ipc.open_stream, public_pb2.Schema) applied to the requests our sink sent.

Input: a JSON file (argv[1]) with `uri`, `cases` and `decode`; output: one JSON document on
stdout. The DataFrame is built as Merlin's publisher builds it: prediction_log_parser
(`log_to_records` + `log_batch_to_dataframe`, values through `convert_to_numpy_value`),
`InferenceSchema.preprocess` (binary `_prediction_label`, ranking `_rank`), then ArizeSink's
`add_prediction_id_column` and `_to_arize_schema`.
"""

import base64
import json
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
from arize import public_pb2
from arize.pandas.logger import Client, Schema
from arize.utils.types import Environments, ModelTypes
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp


def convert(value, value_type):
    # Merlin's convert_to_numpy_value.
    if value_type is None:
        return np.float64(value) if isinstance(value, (int, float)) else np.str_(value)
    if value_type == "int64":
        return np.int64(value)
    if value_type == "float64":
        return np.float64(value)
    if value_type == "boolean":
        return np.bool_(value)
    if value_type == "string":
        return np.str_(value)
    raise ValueError(value_type)


def dataframe(case):
    s = case["schema"]
    feature_types = dict(s["feature_types"])
    prediction_types = {s["score"]: "float64"}
    if s["output"] == "binary":
        prediction_types["_prediction_label"] = "string"
    elif s["output"] == "ranking":
        prediction_types["_rank"] = "int64"
    records, columns = [], []
    for log in case["logs"]:
        ts = Timestamp(seconds=log["seconds"], nanos=log["nanos"]).ToDatetime()
        if log.get("no_timestamp"):
            ts = None
        frows = [
            [convert(v, feature_types.get(c)) for v, c in zip(row, log["feature_columns"])]
            for row in log["feature_rows"]
        ]
        prows = [
            [convert(v, prediction_types.get(c)) for v, c in zip(row, log["prediction_columns"])]
            for row in log["prediction_rows"]
        ]
        for f, p, rid in zip(frows, prows, log["row_ids"]):
            records.append(f + p + [log["prediction_id"], rid, ts, case["model_version"]])
        columns = (
            log["feature_columns"]
            + log["prediction_columns"]
            + [s["session_id_column"], s["row_id_column"], "request_timestamp", "model_version"]
        )
    df = pd.DataFrame.from_records(records, columns=columns)
    # InferenceSchema.preprocess(df, [PREDICTION])
    if s["output"] == "binary":
        df["_prediction_label"] = df[s["score"]].apply(
            lambda x: s["positive"] if x >= s["threshold"] else s["negative"]
        )
        if case.get("label_override") is not None:
            df["_prediction_label"] = case["label_override"]
    elif s["output"] == "ranking":
        df["_rank"] = (
            df.groupby(s["session_id_column"])[s["score"]]
            .rank(method="first", ascending=False)
            .astype(np.int_)
        )
    # add_prediction_id_column
    df["_prediction_id"] = df[s["session_id_column"]] + "_" + df[s["row_id_column"]]
    return df


def arize_schema(case):
    # Merlin's ArizeSink._to_arize_schema
    s = case["schema"]
    common = dict(
        feature_column_names=[n for n, _ in s["feature_types"]],
        prediction_id_column_name="_prediction_id",
        timestamp_column_name="request_timestamp",
    )
    if s["output"] == "binary":
        return ModelTypes.BINARY_CLASSIFICATION, Schema(
            **common,
            prediction_label_column_name="_prediction_label",
            prediction_score_column_name=s["score"],
        )
    if s["output"] == "regression":
        return ModelTypes.REGRESSION, Schema(**common, prediction_score_column_name=s["score"])
    return ModelTypes.RANKING, Schema(
        **common,
        prediction_score_column_name=s["score"],
        rank_column_name="_rank",
        prediction_group_id_column_name=s["session_id_column"],
    )


def send(uri, case):
    model_type, schema = arize_schema(case)
    if "space_id" in case:
        # Arize's current SDK only (scripts/arize-oracle current on PYTHONPATH).
        client = Client(api_key=case["api_key"], space_id=case["space_id"], uri=uri)
    else:
        client = Client(api_key=case["api_key"], space_key=case["space_key"], uri=uri)
    try:
        client.log(
            dataframe=dataframe(case),
            environment=Environments.PRODUCTION,
            schema=schema,
            model_id=f"{case['project']}-{case['model_id']}",
            model_type=model_type,
            model_version=case["model_version"],
        )
        return {"name": case["name"], "refused": False, "errors": []}
    except Exception as e:  # ValidationFailure carries .errors
        errors = [type(x).__name__ for x in getattr(e, "errors", [])] or [repr(e)]
        return {"name": case["name"], "refused": True, "errors": errors}


def decode(item):
    with open(item["body_path"], "rb") as f:
        table = pa.ipc.open_stream(f.read()).read_all()
    schema = public_pb2.Schema.FromString(base64.b64decode(item["schema_b64"]))
    meta = table.schema.metadata or {}
    meta_schema = meta.get(b"arize-schema")
    return {
        "name": item["name"],
        "fields": [[f.name, str(f.type)] for f in table.schema],
        "rows": table.num_rows,
        "schema": MessageToDict(schema, preserving_proto_field_name=True),
        "metadata_schema": "absent"
        if meta_schema is None
        else "matches"
        if public_pb2.Schema.FromString(base64.b64decode(meta_schema)) == schema
        else "differs",
    }


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    out = {
        "sent": [send(spec["uri"], c) for c in spec.get("cases", [])],
        "decoded": [decode(d) for d in spec.get("decode", [])],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
