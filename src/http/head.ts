/** HEAD is a GET whose answer has no body: the GET's status and headers, its body dropped. */
export async function headOf(response: Response): Promise<Response> {
  await response.body?.cancel();
  return new Response(null, { status: response.status, headers: response.headers });
}
