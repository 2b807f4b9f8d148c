"""The tools of the recorded world, written the way a benchmark ships them: one class per tool, each
with the same `invoke(data, **kwargs)` (the database is `data`, changed in place) and no schema of
its own (the schemas are tools.json). Written for orchlib's tests and guide."""

import json


class GetOrderDetails:
    @staticmethod
    def invoke(data, order_id):
        order = data["orders"].get(order_id)
        if order is None:
            return "Error: order not found"
        return json.dumps(order)


class CancelPendingOrder:
    @staticmethod
    def invoke(data, order_id, reason):
        order = data["orders"].get(order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != "pending":
            return "Error: only a pending order can be cancelled"
        if reason not in ("no longer needed", "ordered by mistake"):
            return "Error: invalid reason"
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        return json.dumps(order)


TOOLS = {"get_order_details": GetOrderDetails, "cancel_pending_order": CancelPendingOrder}
