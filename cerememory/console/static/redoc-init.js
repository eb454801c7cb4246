// ReDoc over this server's OpenAPI document.
window.addEventListener("load", function () {
  Redoc.init("/openapi.json", { hideDownloadButton: false }, document.getElementById("redoc"));
});
