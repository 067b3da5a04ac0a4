"""A local stand-in for a vision model behind the Chat Completions API, for the end-to-end tests:
`python3 vision.py PORT` answers `POST /v1/chat/completions` as the API reference documents, with a
`json_schema` answer naming two foods, after checking that the request carries an image as a data
URL and a JSON schema. The stack's nutrition service is pointed at it (ANALYZER_URL)."""
import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PLATE = {
    "meal_name": "Chicken with rice",
    "items": [
        {"name": "grilled chicken breast", "grams": 150, "confidence": 0.9, "tags": ["poultry", "meat"],
         "per_100g": {"calories": 165, "protein_g": 31, "carbs_g": 0, "fat_g": 3.6, "fiber_g": 0, "sugar_g": 0, "saturated_fat_g": 1, "sodium_mg": 74}},
        {"name": "white rice, cooked", "grams": 200, "confidence": 0.8, "tags": ["grain"],
         "per_100g": {"calories": 130, "protein_g": 2.7, "carbs_g": 28, "fat_g": 0.3, "fiber_g": 0.4, "sugar_g": 0.1, "saturated_fat_g": None, "sodium_mg": 1}},
    ],
}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/chat/completions":
            return self.answer(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
        images = [part["image_url"]["url"] for message in request["messages"] if isinstance(message["content"], list)
                  for part in message["content"] if part.get("type") == "image_url"]
        schema = request.get("response_format", {}).get("json_schema", {}).get("schema")
        if len(images) != 1 or not images[0].startswith("data:image/jpeg;base64,") or not schema:
            return self.answer(400, {"error": {"message": "an image and a json_schema are required", "type": "invalid_request_error"}})
        base64.b64decode(images[0].split(",", 1)[1], validate=True)
        self.answer(200, {"id": "chatcmpl-e2e", "object": "chat.completion", "created": 1764300000, "model": request["model"],
                          "choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(PLATE), "refusal": None},
                                       "finish_reason": "stop"}]})


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
